"""The spec itself: every message round-trips, descriptor invariants hold, logprobs pack tightly."""

from __future__ import annotations

import importlib
import pkgutil

import modelir.v1
import pytest
from google.protobuf import descriptor, json_format
from google.protobuf.message import Message
from modelir.v1 import logprobs_pb2, version_pb2
from modelir.version import IR_VERSION, parse_semver

FD = descriptor.FieldDescriptor
MODULES = [
    importlib.import_module(f"modelir.v1.{m.name}")
    for m in pkgutil.iter_modules(modelir.v1.__path__)
    if m.name.endswith("_pb2")
]
FILES = [m.DESCRIPTOR for m in MODULES]


def _all_messages(desc_list):
    for d in desc_list:
        if d.GetOptions().map_entry:
            continue
        yield d
        yield from _all_messages(d.nested_types)


MESSAGES = [d for f in FILES for d in _all_messages(f.message_types_by_name.values())]
ENUMS = [e for f in FILES for e in f.enum_types_by_name.values()] + [e for m in MESSAGES for e in m.enum_types]


def _scalar(field: descriptor.FieldDescriptor, salt: int):
    t = field.type
    if t in (FD.TYPE_DOUBLE, FD.TYPE_FLOAT):
        return 0.5 + salt
    if t == FD.TYPE_BOOL:
        return True
    if t == FD.TYPE_STRING:
        return f"{field.name}-{salt}-é"
    if t == FD.TYPE_BYTES:
        return bytes([0, 255, salt % 256])
    if t == FD.TYPE_ENUM:
        values = field.enum_type.values
        return values[-1].number
    if t in (
        FD.TYPE_INT32,
        FD.TYPE_SINT32,
        FD.TYPE_SFIXED32,
        FD.TYPE_INT64,
        FD.TYPE_SINT64,
        FD.TYPE_SFIXED64,
    ):
        return -3 - salt
    return 7 + salt  # unsigned


def fill(msg: Message, depth: int = 0) -> Message:
    """Set every field (the first member of each oneof), recursing a few levels into sub-messages."""
    seen_oneofs = set()
    for field in msg.DESCRIPTOR.fields:
        oneof = field.containing_oneof
        # Proto3 `optional` fields sit in synthetic one-member oneofs named `_<field>`; only real oneofs count.
        if oneof is not None and not oneof.name.startswith("_"):
            if oneof.name in seen_oneofs:
                continue
            seen_oneofs.add(oneof.name)
        value = getattr(msg, field.name)
        if field.message_type is not None:
            if field.message_type.GetOptions().map_entry:
                key_field = field.message_type.fields_by_name["key"]
                value_field = field.message_type.fields_by_name["value"]
                if value_field.message_type is None:
                    value[_scalar(key_field, 1)] = _scalar(value_field, 1)
                continue
            if depth > 3:
                continue
            if field.is_repeated:
                fill(value.add(), depth + 1)
            elif field.message_type.full_name.startswith("google.protobuf."):
                value.SetInParent()
            else:
                fill(value, depth + 1)
        elif field.is_repeated:
            value.extend([_scalar(field, 1), _scalar(field, 2)])
        else:
            setattr(msg, field.name, _scalar(field, 1))
    return msg


@pytest.mark.parametrize("desc", MESSAGES, ids=lambda d: d.full_name)
def test_every_message_round_trips_binary_and_json(desc):
    cls = _message_class(desc)
    original = fill(cls())
    assert original.ByteSize() > 0 or not desc.fields
    binary = cls.FromString(original.SerializeToString())
    assert binary == original
    json_copy = json_format.Parse(json_format.MessageToJson(original), cls())
    assert json_copy == original


def _message_class(desc):
    from google.protobuf import message_factory

    return message_factory.GetMessageClass(desc)


@pytest.mark.parametrize("enum", ENUMS, ids=lambda e: e.full_name)
def test_every_enum_starts_with_unspecified_and_prefixes_values(enum):
    prefix = "".join("_" + c if c.isupper() and i else c for i, c in enumerate(enum.name)).upper() + "_"
    assert enum.values[0].number == 0
    assert enum.values[0].name == prefix + "UNSPECIFIED"
    assert all(v.name.startswith(prefix) for v in enum.values)


def test_ir_version_is_in_the_descriptor_and_is_semver():
    options = version_pb2.DESCRIPTOR.GetOptions()
    assert options.HasExtension(version_pb2.ir_version)
    assert options.Extensions[version_pb2.ir_version] == IR_VERSION
    version = parse_semver(IR_VERSION)
    assert version.major == 1  # the package is modelir.v1


def test_every_file_is_in_package_modelir_v1():
    for f in FILES:
        assert f.package == "modelir.v1"
        assert f.name.startswith("modelir/v1/")


def _varint_len(value: int) -> int:
    if value < 0:
        value += 1 << 64
    n = 1
    while value >= 0x80:
        value >>= 7
        n += 1
    return n


def test_logprob_heavy_response_serializes_close_to_packed_minimum():
    """32,768 sampled tokens with 20 alternatives each.

    The packed minimum is the payload alone: 4 bytes per float logprob and the varint size of every id, count and
    offset, plus the raw token bytes. Packed fields add one tag and one length prefix per *field*, not per token,
    so the serialized size must stay within 64 bytes of that minimum. One sub-message per token would add at
    least 2 bytes of framing per token (over 64 KiB here), so the bound fails for any per-token layout.
    """
    n, k = 32_768, 20
    ids = [(i * 7919) % 151_000 for i in range(n)]
    top_ids = [(i * 104_729) % 151_000 for i in range(n * k)]
    logprobs = logprobs_pb2.TokenLogprobs(
        token_ids=ids,
        token_logprobs=[-(i % 97) / 10 for i in range(n)],
        token_bytes=bytes(i % 251 for i in range(n)),
        token_byte_offsets=list(range(n)),
        top_counts=[k] * n,
        top_token_ids=top_ids,
        top_logprobs=[-(i % 89) / 10 for i in range(n * k)],
    )
    payload = (
        sum(map(_varint_len, ids))
        + 4 * n
        + n
        + sum(map(_varint_len, range(n)))
        + n * _varint_len(k)
        + sum(map(_varint_len, top_ids))
        + 4 * n * k
    )
    size = logprobs.ByteSize()
    assert payload <= size <= payload + 64, (size, payload)
