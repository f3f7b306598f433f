"""One decode for a unary lift and its accounting: the lift's typed answer, closed to the wire's declared members.

`lift_accounted` used to decode an answer twice: the lift into its typed structs (which ignore members they do not
name), then `accounting` into the structs of the wire's `native_fields` section (which refuse members nobody
declared). Here the lift's own structs are subclassed once per (struct, section) into closed ones: every member the
section declares at a level it descends into is a field (the lift's where it has one), `forbid_unknown_fields`
refuses the rest, and the members whose presence alone means accounting has something to say (a declared `fact`, or
a member the lift's structs read but this wire does not declare) default to `UNSET`. One decode then gives the
lift's answer and, when it succeeds with every such member absent, the proof that accounting would find nothing.

Anything else (a member nobody declared, a fact, a value of another shape, an answer that is not JSON) returns
None, and the caller takes the two-decode path, which is the reference: the results are the same either way
(`tests/test_accounting_typed.py` holds the two to it over every fixture and recording). A section this cannot say
(a tagged union, an object with any-members) has no closed structs, and always takes the reference path.

A stream event gets the same proof (`nothing_to_account`, which `AccountedStream.feed` asks first): stream lifts
read their events as JSON, so a skeleton struct (naming only the members with declared members below) stands in
for the lift's structs; when the closed decode succeeds, `accounting.findings` is skipped, its decode and its walk
of the facts (`tests/test_accounting_stream_once.py` holds the promise over every stream event we have).
"""

from __future__ import annotations

import functools
import itertools
import types
import typing
from dataclasses import dataclass, field
from typing import Any, TypeVar

import msgspec

from modelir.transports import accounting
from modelir.transports.accounting import Node

T = TypeVar("T", bound=msgspec.Struct)
_names = itertools.count()
_ABSENT = msgspec.Raw  # with UNSET for its default: a member whose presence sends the answer to the reference path


class Unsupported(Exception):
    """A section (or a lift struct) the closed structs cannot say: that wire keeps the reference path."""


@dataclass(slots=True)
class Plan:
    """What to look at in a decoded closed struct once the decode succeeded."""

    # (attribute, the lift's default): members the lift reads but the section does not declare (or declares a
    # fact), decoded with UNSET for absent; they must be UNSET, and get the lift's default back.
    absent: list[tuple[str, Any]] = field(default_factory=list)
    # (attribute, shape): builtin values (a `dict` the lift reads as such) checked against their node's shape.
    values: list[tuple[str, Shape]] = field(default_factory=list)
    structs: list[tuple[str, Plan]] = field(default_factory=list)  # a closed struct (or None) below
    lists: list[tuple[str, Plan]] = field(default_factory=list)  # a list of closed structs (or None) below

    @property
    def empty(self) -> bool:
        return not (self.absent or self.values or self.structs or self.lists)


def _optional(tp: Any) -> tuple[Any, bool]:
    """(the type, whether None was among it) for `X | None`; refused for other unions."""
    if isinstance(tp, types.UnionType) or typing.get_origin(tp) is typing.Union:
        members = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(members) != 1:
            raise Unsupported(f"a union the closed structs cannot follow: {tp!r}")
        return members[0], len(members) < len(typing.get_args(tp))
    return tp, False


def _is_struct(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, msgspec.Struct)


def _builtin(tp: Any) -> bool:
    """A type the lift reads as decoded JSON (`dict`, `list`, `list[int]`, `Any`): checked value by value."""
    origin = typing.get_origin(tp) or tp
    if origin in (dict, list):
        return not any(_is_struct(a) or a is msgspec.Raw for a in typing.get_args(tp))
    return tp is Any


def _closed(tp: Any, node: Node) -> tuple[Any, Plan | None, str]:
    """(the closed type of a value of `node` the lift types as `tp`, how to check it, "struct"/"list"/"value")."""
    if node.whole:
        return tp, None, ""  # accounted whole: whatever is below is the lift's business
    if node.variants or node.any_key is not None:
        raise Unsupported("tagged unions and any-members are walked by accounting")
    inner, nullable = _optional(tp)
    if _builtin(inner):
        return tp, None, "value"
    if node.items is not None and not node.keys:
        if typing.get_origin(inner) is not list:
            raise Unsupported(f"an array the lift does not type as a list: {tp!r}")
        (item,) = typing.get_args(inner)
        item_type, plan, how = _closed(item, node.items)
        if how != "struct":
            raise Unsupported(f"an array of {item!r}: only arrays of structs are closed")
        closed_list: Any = list[item_type]  # type: ignore[valid-type]
        return (closed_list | None if nullable else closed_list), plan, "list"
    if node.items is not None or not _is_struct(inner):
        raise Unsupported(f"an object the lift types as {tp!r}")
    struct, plan = closed_struct(inner, node)
    return (struct | None if nullable else struct), plan, "struct"


def closed_struct(lift: type[T], node: Node) -> tuple[type[T], Plan]:
    """`lift` subclassed to refuse every member `node` does not declare (see the module's docstring)."""
    config = lift.__struct_config__
    if config.tag_field is not None:
        raise Unsupported(f"{lift.__name__}: tagged structs are not closed here")
    fields: list[tuple[str, Any, Any]] = []
    rename: dict[str, str] = {}
    plan = Plan()
    known: set[str] = set()
    for info in msgspec.structs.fields(lift):
        key = info.encode_name
        known.add(key)
        child = node.keys.get(key)
        if info.default is msgspec.NODEFAULT:
            raise Unsupported(f"{lift.__name__}.{info.name} has no default")
        if child is None or (child.whole and child.disposition == "fact"):
            # read by the lift (a dialect's member) but not declared here, or a fact: its presence is for accounting
            fields.append((info.name, _ABSENT, msgspec.UNSET))
            rename[info.name] = key
            plan.absent.append((info.name, info.default))
            continue
        closed, below, how = _closed(info.type, child)
        if how == "value":
            plan.values.append((info.name, _shape(child)))
        elif how == "struct" and below is not None and not below.empty:
            plan.structs.append((info.name, below))
        elif how == "list" and below is not None and not below.empty:
            plan.lists.append((info.name, below))
        if closed is not info.type:
            fields.append((info.name, closed, info.default))
            rename[info.name] = key
    for key, child in node.keys.items():
        if key in known or child.disposition == "fact" or not child.whole:
            # not a field: present, a fact (for accounting to keep) or a member with declared members below that
            # the lift does not read (for accounting to walk) is refused by the decode itself
            continue
        attribute = f"declared_{next(_names)}"  # declared, and nothing for accounting to say: decoded and left
        fields.append((attribute, msgspec.Raw, None))
        rename[attribute] = key
    closed_type = msgspec.defstruct(
        f"Closed{lift.__name__}", fields, bases=(lift,), rename=rename, forbid_unknown_fields=True
    )
    return closed_type, plan  # type: ignore[return-value]  # a subclass of `lift`, made at run time


@dataclass(frozen=True, slots=True)
class Shape:
    """A node's declared members, for checking a decoded builtin value against it (`_fits`)."""

    allowed: frozenset[str]  # the members accounting has nothing to say about (declared, not a whole fact)
    below: tuple[tuple[str, Shape], ...]  # the members with declared members of their own, checked in turn
    items: Shape | None  # an array's elements, when they have declared members


def _shape(node: Node) -> Shape:
    if node.variants or node.any_key is not None:
        raise Unsupported("tagged unions and any-members are walked by accounting")
    allowed, below = set(), []
    for key, child in node.keys.items():
        if not child.whole:
            below.append((key, _shape(child)))
        elif child.disposition == "fact":
            continue  # present, it is a fact for accounting to keep
        allowed.add(key)
    items = node.items
    if items is not None and items.whole and items.disposition == "fact":
        raise Unsupported("an array of facts is kept by accounting")
    return Shape(frozenset(allowed), tuple(below), _shape(items) if items is not None and not items.whole else None)


def _fits(value: Any, shape: Shape) -> bool:
    """Whether accounting's walk would find nothing in a decoded builtin `value` of this shape (`accounting._walk`:
    it names the members of an object that are not declared, and looks no further into anything else)."""
    if type(value) is dict:
        if not shape.allowed.issuperset(value):
            return False
        for key, below in shape.below:
            member = value.get(key)
            if member is not None and not _fits(member, below):
                return False
        return True
    if type(value) is list and shape.items is not None:
        items = shape.items
        return all(_fits(item, items) for item in value)
    return True  # a scalar (or an array where no elements are declared): the walk does not look inside


def _settled(value: Any, plan: Plan) -> bool:
    """Check a decoded closed struct against its plan, putting the lift's defaults back where members are absent."""
    for attribute, default in plan.absent:
        if getattr(value, attribute) is not msgspec.UNSET:
            return False
        setattr(value, attribute, default)
    for attribute, shape in plan.values:
        member = getattr(value, attribute)
        if member is not None and not _fits(member, shape):
            return False
    for attribute, below in plan.structs:
        member = getattr(value, attribute)
        if member is not None and not _settled(member, below):
            return False
    for attribute, below in plan.lists:
        for item in getattr(value, attribute) or ():
            if not _settled(item, below):
                return False
    return True


@dataclass(slots=True)
class Closed:
    decoder: msgspec.json.Decoder[Any]
    plan: Plan


@functools.cache
def closed(lift: type[msgspec.Struct], section: str) -> Closed | None:
    """The closed decoder of `lift` under the `native_fields` section `section`; None when it cannot be made."""
    schema = accounting.schema(section)
    if schema is None:
        return None
    try:
        struct, plan = closed_struct(lift, schema.root)
    except Unsupported:
        return None
    return Closed(msgspec.json.Decoder(struct), plan)


def decode_accounted(lift: type[T], section: str, body: bytes) -> T | None:
    """`body` decoded as the lift's `lift` struct when accounting it under `section` would find nothing; else None
    (the caller lifts and accounts it the reference way)."""
    once = closed(lift, section)
    if once is None:
        return None
    try:
        value = once.decoder.decode(body)
    except (msgspec.DecodeError, RecursionError):  # ValidationError included: the reference path says what it is
        return None
    return value if _settled(value, once.plan) else None


def _skeleton_type(node: Node) -> Any:
    """The type a stream skeleton gives a member with declared members below it (see `stream_closed`)."""
    if node.keys and not (node.items or node.variants or node.any_key):
        return _skeleton(node) | None
    if node.items is not None and not (node.keys or node.variants or node.any_key):
        item = node.items
        if item.keys and not (item.items or item.variants or item.any_key):
            return list[_skeleton(item)] | None  # type: ignore[misc]  # made at run time
    return Any  # decoded as JSON and checked against its shape (`_fits`), or refused by `_shape`


def _skeleton(node: Node) -> type[msgspec.Struct]:
    """A struct that names only the members of `node` with declared members below: `closed_struct` adds the rest."""
    fields: list[tuple[str, Any, Any]] = []
    rename: dict[str, str] = {}
    for key, child in node.keys.items():
        if not child.whole:
            attribute = f"below_{next(_names)}"
            fields.append((attribute, _skeleton_type(child), None))
            rename[attribute] = key
    return msgspec.defstruct(f"Skeleton{next(_names)}", fields, rename=rename)


@functools.cache
def stream_closed(section: str) -> Closed | None:
    """A closed decoder of a stream event under `section`, for the proof alone: a stream lift reads its events as
    JSON, so there is no lift struct to close; the skeleton stands in for one. None when it cannot be made."""
    schema = accounting.schema(section)
    if schema is None:
        return None
    root = schema.root
    if root.items is not None or root.variants or root.any_key is not None or not root.keys:
        return None  # a tagged event (Anthropic's, Responses'), or a batch: walked by accounting, every event
    try:
        struct, plan = closed_struct(_skeleton(schema.root), schema.root)
    except Unsupported:
        return None
    return Closed(msgspec.json.Decoder(struct), plan)


def nothing_to_account(section: str, data: bytes) -> bool:
    """Whether accounting a stream event under `section` surely finds nothing (`accounting.findings` would return
    `[]`): one closed decode, no walk. False says only that the caller must ask `findings`."""
    once = stream_closed(section)
    if once is None:
        return False
    try:
        value = once.decoder.decode(data)
    except (msgspec.DecodeError, RecursionError):
        return False
    return _settled(value, once.plan)
