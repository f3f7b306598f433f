"""One pass over an answer for `accounting`: msgspec structs made from a section's schema.

Walking an answer level by level decodes each level's object again, and each decode scans everything below it: a
2,000 x top-20 logprob answer (3 MB) would be scanned once per level on the way to the logprob array the lift reads
whole. Instead each section gets a decoder of structs generated from its schema, whose every declared-whole member
is a `msgspec.Raw` and which forbids unknown members: one scan decodes the answer, and a success means that every
member is declared. What the structs cannot say (tagged unions, objects with both named and any members) stays raw
and is walked by `accounting`; the facts are read from the decoded structs. Anything the structs refuse (a member
nobody declared, a value of another shape) sends the whole answer to the walker, which names what it finds.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

import msgspec

_names = itertools.count()


@dataclass(slots=True)
class Plan:
    """How the decoded value of one schema node is visited after the single decode."""

    node: Any  # accounting.Node
    raw: bool  # decoded as `msgspec.Raw`, to be walked (a tagged union, or named and any members at once)
    members: list[tuple[str, str, Plan]] = field(default_factory=list)  # (attribute, JSON key, plan), to visit
    items: Plan | None = None  # the plan of an array's elements (or of an any-member object's values)
    keyed: bool = False  # `items` applies to the values of an object (`*`), not to an array's elements
    index_attribute: str = ""  # for the elements of the `_choice` array: the attribute of their `index`
    tagged: str = ""  # a variant of a tagged union: `(type=x)`, which the paths it names carry
    variants: dict[type, Plan] = field(default_factory=dict)  # a tagged union: each variant's struct -> its plan
    visit: bool = False  # whether anything below needs a look (a fact, or a raw part to walk)


def _union(node: Any) -> tuple[Any, Plan] | None:
    """A tagged union as msgspec's tagged structs (a variant of an undeclared type then fails the decode, and the
    walker names it); None when it has more than the one tag or a variant the structs cannot say."""
    if len(node.variants) != 1 or node.any_key is not None or node.items is not None:
        return None
    ((tag, values),) = node.variants.items()
    types, plans = [], {}
    for value, variant in values.items():
        if variant.whole and variant.disposition == "fact":
            return None
        keys = {} if variant.whole else {**node.keys, **variant.keys}
        keys.pop(tag, None)  # the tag is msgspec's own
        if not variant.whole and (variant.variants or variant.any_key is not None or variant.items is not None):
            return None
        struct, plan = _struct(variant, keys, tag=tag, value=value, closed=not variant.whole)
        types.append(struct)
        plans[struct] = plan
    union = plans.copy()
    return (
        msgspec.Raw if not types else _optional(types),
        Plan(node, raw=False, variants=union, visit=any(p.visit for p in plans.values())),
    )


def _optional(types: list[Any]) -> Any:
    out = types[0]
    for more in types[1:]:
        out = out | more
    return out | None


def _struct(
    node: Any, keys: dict[str, Any], *, tag: str = "", value: str = "", closed: bool = True
) -> tuple[Any, Plan]:
    fields: list[tuple[str, Any, None]] = []
    rename: dict[str, str] = {}
    members: list[tuple[str, str, Plan]] = []
    for key, child in keys.items():
        attribute = f"m{len(fields)}"
        child_type, child_plan = _plan(child)
        fields.append((attribute, child_type, None))
        rename[attribute] = key
        if child_plan.visit:
            members.append((attribute, key, child_plan))
    options: dict[str, Any] = {"tag_field": tag, "tag": value} if tag else {}
    struct = msgspec.defstruct(
        f"Declared{next(_names)}", fields, rename=rename, forbid_unknown_fields=closed, **options
    )
    index = next((a for a, key in rename.items() if key == "index"), "") if node.choice else ""
    tagged = f"({tag}={value})" if tag else ""
    return struct, Plan(node, raw=False, members=members, visit=bool(members), index_attribute=index, tagged=tagged)


def _plan(node: Any) -> tuple[Any, Plan]:
    """(the msgspec type a value of `node` decodes as, how to visit it afterwards)."""
    if node.whole:
        return msgspec.Raw, Plan(node, raw=False, visit=node.disposition == "fact")
    if node.variants and (union := _union(node)) is not None:
        return union
    if node.variants or (node.keys and (node.any_key is not None or node.items is not None)):
        return msgspec.Raw, Plan(node, raw=True, visit=True)
    if node.items is not None and node.any_key is None:
        item_type, item_plan = _plan(node.items)
        return list[item_type] | None, Plan(node, raw=False, items=item_plan, visit=item_plan.visit)  # type: ignore[valid-type]
    if node.any_key is not None:
        value_type, value_plan = _plan(node.any_key)
        plan = Plan(node, raw=False, items=value_plan, keyed=True, visit=value_plan.visit)
        return dict[str, value_type] | None, plan  # type: ignore[valid-type]
    struct, plan = _struct(node, node.keys)
    return struct | None, plan


@dataclass(slots=True)
class OnePass:
    decoder: msgspec.json.Decoder[Any]
    plan: Plan


def one_pass(root: Any) -> OnePass:
    value_type, plan = _plan(root)
    return OnePass(msgspec.json.Decoder(value_type), plan)
