"""Which media URIs a request may carry to a provider: the one check, and the policy an operator configures.

A `Blob.uri` is fetched by the provider (or, for some engines, by the server modelir talks to), so forwarding it
verbatim lets a caller aim that fetcher anywhere: `file:///etc/passwd` on a self-hosted engine, the cloud metadata
service at `http://169.254.169.254/`, a loopback admin port. By default only `https` URIs to public hosts, the
providers' own bucket scheme (`gs`, Gemini and Vertex) and inline `data:` URIs pass; everything else is refused
before any I/O, with an error naming the field. Host names are not resolved (the check is pure): what is refused
is every IP literal (and `localhost`) in a loopback, private, link-local, reserved or unspecified range, however it
is spelled (`hosts`: every IPv4 form `inet_aton` accepts, IPv6 with an embedded IPv4 address, trailing dots), and
an `http(s)` URI not spelled `scheme://authority` (`https:127.0.0.1/x`, `https:/\\127.0.0.1/x`), which fetchers read
in more than one way.

```yaml
server:
  media_uri_policy:
    allow_schemes: [https, gs, data]   # the default
    allow_private_hosts: false         # the default
```
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from google.protobuf.message import Message

from modelir import errors
from modelir.pipeline import hosts
from modelir.pipeline.survey import Survey, place
from modelir.v1 import content_pb2, errors_pb2

DEFAULT_SCHEMES = frozenset({"https", "gs", "data"})


@dataclass(frozen=True, slots=True)
class MediaPolicy:
    allow_schemes: frozenset[str] = DEFAULT_SCHEMES
    allow_private_hosts: bool = False

    def problem(self, uri: str) -> str | None:
        """Why `uri` may not be forwarded, or None when it may."""
        try:
            parts = urlsplit(uri)
        except ValueError:
            return "is not a valid URI"
        scheme = parts.scheme.lower()
        if scheme not in self.allow_schemes:
            allowed = ", ".join(sorted(self.allow_schemes))
            return f"uses the scheme {scheme or '(none)'!r}, which is not forwarded (allowed: {allowed})"
        if scheme in ("http", "https") and not self.allow_private_hosts:
            return _host_problem(uri)
        return None


DEFAULT_POLICY = MediaPolicy()


def check(request: Message, policy: MediaPolicy = DEFAULT_POLICY, seen: Survey | None = None) -> None:
    """Raise `InvalidRequestError` naming every media URI of `request` that `policy` does not forward.

    With `seen` (the survey of `request`, a `Request`), only the parts it noted as able to hold a media URI are
    looked at; without it, every field that can hold a `Blob` is walked (any message: a `Part`, a `Request`)."""
    if seen is not None:
        if not seen.media:  # the common case: no blob at all
            return
        found = [uri for part in seen.media for uri in _surveyed_uris(*part)]
    elif not _has_uri(request):  # the common case, found without building a single field path
        return
    else:
        found = list(_uris(request, ""))
    violations = [
        errors_pb2.FieldViolation(field=field, description=f"The media URI {problem}.")
        for field, uri in found
        if (problem := policy.problem(uri)) is not None
    ]
    if violations:
        raise errors.InvalidRequestError(violations)


def _surveyed_uris(i: int, j: int, k: int, part: content_pb2.Part, kind: str) -> Iterator[tuple[str, str]]:
    """(field path, uri) of the media URIs in one part the survey noted (a blob, or a provider-run tool's result)."""
    if kind == "blob":
        if part.blob.WhichOneof("source") == "uri":
            yield f"{place(i, j, k)}.blob.uri", part.blob.uri
    else:
        yield from _uris(getattr(part, kind), f"{place(i, j, k)}.{kind}")


def build_media_policy(spec: Any, fail: Any) -> MediaPolicy:
    """The policy of a configuration's `server.media_uri_policy` (absent: the default)."""
    if spec is None:
        return DEFAULT_POLICY
    if not isinstance(spec, dict) or set(spec) - {"allow_schemes", "allow_private_hosts"}:
        raise fail("server.media_uri_policy", "expected {allow_schemes: [...], allow_private_hosts: true|false}")
    schemes = spec.get("allow_schemes", sorted(DEFAULT_SCHEMES))
    if not isinstance(schemes, list) or not all(isinstance(s, str) and s for s in schemes):
        raise fail("server.media_uri_policy.allow_schemes", "expected a list of URI schemes, e.g. [https, gs]")
    private = spec.get("allow_private_hosts", False)
    if not isinstance(private, bool):
        raise fail("server.media_uri_policy.allow_private_hosts", "expected true or false")
    return MediaPolicy(frozenset(s.lower() for s in schemes), private)


def _host_problem(uri: str) -> str | None:
    """Why an `http(s)` URI may not go out under a policy that refuses private hosts, or None."""
    try:
        host, canonical = hosts.host_of(uri)
        if not canonical:
            return f"is not spelled scheme://host/... (fetchers read {uri!r} in more than one way)"
        if not host:
            return "names no host"
        if hosts.is_private(host):
            return f"points at {host!r}, a loopback, private or link-local address, which is not forwarded"
    except hosts.MalformedHost as exc:
        return f"has a host that cannot be read: {exc}"
    return None


def _uris(message: Message, path: str) -> Iterator[tuple[str, str]]:
    """(field path, uri) of every `Blob` with a URI anywhere in `message`.

    Only fields whose type can hold a `Blob` are entered (`_blob_fields`): a chat request without images is a few
    field lookups, not a walk over its sampling, logprob and tool settings."""
    if type(message) is content_pb2.Blob:
        if message.WhichOneof("source") == "uri":
            yield f"{path}.uri", message.uri
        return
    for name, repeated in _blob_fields(type(message)):
        where = f"{path}.{name}" if path else name
        if repeated:
            for index, item in enumerate(getattr(message, name)):
                yield from _uris(item, f"{where}[{index}]")
        elif message.HasField(name):
            yield from _uris(getattr(message, name), where)


def _has_uri(message: Message) -> bool:
    """Whether `message` holds a `Blob` with a URI anywhere (the walk of `_uris`, without the paths)."""
    if type(message) is content_pb2.Blob:
        return message.WhichOneof("source") == "uri"
    for name, repeated in _blob_fields(type(message)):
        if repeated:
            for item in getattr(message, name):
                if _has_uri(item):
                    return True
        elif message.HasField(name) and _has_uri(getattr(message, name)):
            return True
    return False


_BLOB_FIELDS: dict[type, tuple[tuple[str, bool], ...]] = {}


def _blob_fields(message_type: type[Message]) -> tuple[tuple[str, bool], ...]:
    """(name, repeated) of the fields of `message_type` whose type is, or can contain, a `Blob` (maps excluded);
    worked out once per message type."""
    found = _BLOB_FIELDS.get(message_type)
    if found is None:
        found = _BLOB_FIELDS[message_type] = tuple(
            (field.name, field.is_repeated)
            for field in message_type.DESCRIPTOR.fields
            if field.message_type is not None
            and not field.message_type.GetOptions().map_entry
            and _reaches_blob(field.message_type, frozenset())
        )
    return found


def _reaches_blob(descriptor: Any, seen: frozenset[str]) -> bool:
    if descriptor.full_name == content_pb2.Blob.DESCRIPTOR.full_name:
        return True
    if descriptor.full_name in seen:  # a recursive message (a part holding messages): decided where it started
        return False
    seen = seen | {descriptor.full_name}
    return any(
        field.message_type is not None
        and not field.message_type.GetOptions().map_entry
        and _reaches_blob(field.message_type, seen)
        for field in descriptor.fields
    )
