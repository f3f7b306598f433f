"""The host an `http(s)` URL names, read the way a fetcher reads it, and whether it is a private address.

A provider's fetcher (a browser-grade URL parser, curl, glibc's `inet_aton`) is lenient: `https:127.0.0.1/x`,
`https:/\\127.0.0.1/x` and `https://127.0.0.1/x` are one URL to it, and `2130706433`, `0x7f.1`, `0177.0.0.1`,
`127.1` and `127.0.0.1` are one address. So the check is made on the host as such a parser would find it: the
authority after any run of slashes or backslashes, user info and port removed, percent-escapes decoded, full-width
characters folded (NFKC), trailing dots dropped, and every IPv4 spelling `inet_aton` accepts read as the address
it means; IPv6 literals are read with their embedded IPv4 address (mapped, compatible, 6to4, NAT64) checked too.
"""

from __future__ import annotations

import ipaddress
import re
import socket
import unicodedata
from urllib.parse import unquote

# What the WHATWG URL parser strips or removes before parsing: leading and trailing C0 controls and spaces, and
# tabs and newlines anywhere.
_STRIPPED = "".join(chr(c) for c in range(0x21))
_REMOVED = re.compile(r"[\t\n\r]")
# Dots as IDNA maps them (ideographic, full-width, half-width).
_DOTS = str.maketrans({"\u3002": ".", "\uff0e": ".", "\uff61": "."})
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
_LOCAL_NAMES = ("localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback")


class MalformedHost(ValueError):
    """The URL's authority cannot be read as a host (a fetcher might read it some other way)."""


def host_of(uri: str) -> tuple[str, bool]:
    """The host of an `http(s)` URL as a lenient fetcher finds it, and whether the URL was spelled canonically
    (`scheme://authority`, no backslash or stray whitespace)."""
    cleaned = _REMOVED.sub("", uri.strip(_STRIPPED))
    rest = cleaned.partition(":")[2]
    canonical = (
        cleaned == uri
        and rest.startswith("//")
        and not rest.startswith("///")
        and "\\" not in rest.split("?", 1)[0].split("#", 1)[0]
    )
    rest = rest.replace("\\", "/").lstrip("/")
    authority = re.split(r"[/?#]", rest, maxsplit=1)[0]
    host = authority.rpartition("@")[2]
    if host.startswith("["):
        end = host.find("]")
        if end < 0:
            raise MalformedHost(f"the IPv6 literal in {authority!r} is not closed")
        return host[: end + 1], canonical
    host = host.partition(":")[0]
    return unicodedata.normalize("NFKC", unquote(host)).translate(_DOTS).lower(), canonical


def is_private(host: str) -> bool:
    """Whether `host` (from `host_of`) is a loopback, private, link-local, reserved, unspecified or multicast
    address, or a local name. Other names are not resolved: they pass."""
    if host.startswith("["):
        try:
            address: ipaddress.IPv4Address | ipaddress.IPv6Address = ipaddress.IPv6Address(host[1:-1])
        except ValueError:
            raise MalformedHost(f"{host} is not an IPv6 address") from None
        return _private_address(address)
    name = host.rstrip(".")
    if not name:
        return host != ""  # `.` alone names the root; an empty host is checked by the caller
    if name in _LOCAL_NAMES or name.endswith(".localhost"):
        return True
    address4 = ipv4(name)
    return address4 is not None and _private_address(address4)


def ipv4(name: str) -> ipaddress.IPv4Address | None:
    """The IPv4 address `name` spells, in any form `inet_aton` (and the WHATWG URL parser) accepts: one to four
    parts, each decimal, hexadecimal (`0x`) or octal (leading `0`); None when it is a name. A name whose last label
    is a number but that is no address is malformed (a fetcher refuses it, or reads it some other way)."""
    labels = name.split(".")
    if not _numeric(labels[-1]):
        return None
    try:
        return ipaddress.IPv4Address(socket.inet_aton(name))
    except OSError:
        pass
    values = [_number(label) for label in labels]
    if any(v is None for v in values) or len(values) > 4:
        raise MalformedHost(f"{name!r} looks like an IPv4 address but is not one")
    *head, last = [v for v in values if v is not None]
    if any(v > 255 for v in head) or last >= 256 ** (5 - len(values)):
        raise MalformedHost(f"{name!r} is an IPv4 address out of range")
    packed = sum(v << (8 * (3 - i)) for i, v in enumerate(head)) + last
    return ipaddress.IPv4Address(packed)


def _numeric(label: str) -> bool:
    return bool(re.fullmatch(r"[0-9]+|0[xX][0-9a-fA-F]*", label))


def _number(label: str) -> int | None:
    if re.fullmatch(r"0[xX][0-9a-fA-F]*", label):
        return int(label[2:] or "0", 16)
    if re.fullmatch(r"0[0-7]+", label):
        return int(label, 8)
    if re.fullmatch(r"[0-9]+", label):
        return int(label)
    return None


def _private_address(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    if isinstance(address, ipaddress.IPv6Address):
        embedded = address.ipv4_mapped or address.sixtofour
        if embedded is None and address.teredo is not None:
            embedded = address.teredo[1]
        if embedded is None and address in _NAT64:
            embedded = ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
        if embedded is None and int(address) >> 32 == 0 and int(address) > 1:  # IPv4-compatible `::a.b.c.d`
            embedded = ipaddress.IPv4Address(int(address))
        if embedded is not None and _private_address(embedded):
            return True
    return not address.is_global or address.is_multicast
