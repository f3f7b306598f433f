"""Protobuf base-128 varints, for the length prefixes written outside a message (record files, `Generate`).

protobuf's Python package keeps its varint codec internal (`google.protobuf.internal`); its public
length-prefixed helpers work on streams and cannot report where a torn entry begins, which record files need.
The encoding is the one the protobuf wire format documents: 7 bits a byte, least significant group first, the
high bit set on every byte but the last.
"""

from __future__ import annotations

_MAX_BYTES = 10  # a 64-bit value needs at most ten 7-bit groups


def encode(value: int) -> bytes:
    """The varint bytes of a non-negative `value`."""
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def decode(data: bytes, position: int) -> tuple[int, int]:
    """The varint at `position`: (value, the position after it).

    Raises `IndexError` when `data` ends inside the varint and `ValueError` when it runs past ten bytes.
    """
    value = shift = 0
    for offset in range(_MAX_BYTES):
        byte = data[position + offset]
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, position + offset + 1
        shift += 7
    raise ValueError(f"a varint at offset {position} runs past {_MAX_BYTES} bytes")
