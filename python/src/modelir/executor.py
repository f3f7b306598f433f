"""All HTTP I/O: one place for connection reuse, deadlines, retries, stream decoding and cancellation.

The httpx API runs on the aiohttp-backed transport (`httpx-aiohttp`, the aiohttp backend the OpenAI Python SDK
offers as its `aiohttp` extra): at 64 requests in flight on a 2-core machine, httpx's own connection pool served
about 12x fewer requests per second than aiohttp. Retries cover 429, 5xx and connection errors, wait with
exponential backoff and full jitter, and honour `Retry-After` and provider retry hints carried by the transport's
typed error. A retry that would pass the caller's deadline is not attempted. A stream is never retried once it
has delivered an event. Cancelling the caller closes the upstream connection.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping
from dataclasses import dataclass

import aiohttp
import httpx
import httpx_sse
import orjson
from httpx_aiohttp import AiohttpTransport

from modelir import errors, telemetry
from modelir.transports.base import HttpRequest, HttpResponse, RawEvent
from modelir.version import SDK_VERSION

DEFAULT_HEADERS = {"user-agent": f"modelir/{SDK_VERSION}", "accept-encoding": "gzip, deflate"}

ErrorFactory = Callable[[HttpResponse], errors.ModelError]
Observer = Callable[[int, Mapping[str, str]], None]


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    max_attempts: int = 4
    backoff_base: float = 0.5  # seconds before the second attempt, doubled each time (before jitter)
    backoff_max: float = 30.0
    retry_after_max: float = 120.0  # a provider hint longer than this is not worth waiting for
    # An attempt is not started with less than this left before the deadline: it could not finish, and the caller
    # would learn "deadline exceeded" instead of what the provider said (429, 503).
    min_attempt_seconds: float = 0.25

    def backoff(self, attempt: int) -> float:
        """Full jitter: uniform in [0, min(max, base * 2**(attempt-1))]."""
        return random.uniform(0, min(self.backoff_max, self.backoff_base * 2 ** (attempt - 1)))


@dataclass(slots=True)
class Sent:
    response: HttpResponse
    attempts: int


class Executor:
    """Sends native HTTP requests for one endpoint. Share one executor between models on the same endpoint."""

    def __init__(
        self,
        base_url: str,
        *,
        headers: Mapping[str, str] | None = None,
        retry: RetryPolicy | None = None,
        connect_timeout: float = 10.0,
        max_connections: int = 256,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.retry = retry or RetryPolicy()
        self._base_url = base_url.rstrip("/") + "/"
        self._base_headers = httpx.Headers({**DEFAULT_HEADERS, **(headers or {})})
        # The credentials this executor sends (the configured headers' values, and a bearer token alone): no error
        # it raises carries them, whatever the provider reflects back in its error body.
        self._secrets = _secrets(headers or {})
        self._urls: dict[str, httpx.URL] = {}
        self._header_sets: dict[tuple[tuple[str, str], ...], httpx.Headers] = {}
        # Per-request deadlines are enforced around each call; only connecting gets its own bound.
        self._extensions = {"timeout": httpx.Timeout(None, connect=connect_timeout).as_dict()}
        # Requests go straight to the mounted transport, not through `httpx.AsyncClient.send`: the client's
        # redirect, auth and cookie-jar layers do nothing a model API needs and cost about a sixth of the
        # gateway's throughput (bench/README.md).
        self._transport = transport or AiohttpTransport(client=lambda: _session(max_connections))

    async def aclose(self) -> None:
        await self._transport.aclose()

    def _build(self, request: HttpRequest) -> httpx.Request:
        # The merged URL and headers are cached per path and header set: no URL parsing or header merging per call.
        return httpx.Request(
            request.method,
            self._url(request.path),
            content=request.body,
            headers=self._headers(request.headers),
            extensions=self._extensions,
        )

    def _url(self, path: str) -> httpx.URL:
        url = self._urls.get(path)
        if url is None:
            url = self._urls[path] = httpx.URL(self._base_url + path.lstrip("/"))
        return url

    def _headers(self, extra: tuple[tuple[str, str], ...]) -> httpx.Headers:
        headers = self._header_sets.get(extra)
        if headers is None:
            headers = self._base_headers.copy()
            headers.update(dict(extra))
            self._header_sets[extra] = headers
        return headers

    async def _wait_before_retry(self, exc: errors.ModelError, attempt: int, deadline: float | None) -> None:
        """Sleep before the next attempt, or re-raise when no attempt is left or the deadline would pass."""
        redact(exc, self._secrets)
        if not exc.retryable or attempt >= self.retry.max_attempts:
            raise exc
        if exc.retry_after is not None:
            if exc.retry_after > self.retry.retry_after_max:
                raise exc
            wait = exc.retry_after + random.uniform(0, 0.1)
        else:
            wait = self.retry.backoff(attempt)
        if deadline is not None and time.monotonic() + wait + self.retry.min_attempt_seconds >= deadline:
            raise exc
        await asyncio.sleep(wait)

    async def send(
        self,
        request: HttpRequest,
        *,
        error_from: ErrorFactory,
        deadline: float | None = None,
        observe: Observer | None = None,
    ) -> Sent:
        """Send a unary request, retrying as the policy allows. `deadline` is a `time.monotonic()` value."""
        try:
            async with asyncio.timeout_at(_loop_deadline(deadline)):
                attempt = 0
                while True:
                    attempt += 1
                    try:
                        built = self._build(request)
                        with telemetry.http_attempt(built, attempt) as observed:
                            raw = await self._transport.handle_async_request(built)
                            observed.answered(raw.status_code, raw.headers)
                            try:
                                body = await raw.aread()
                            finally:
                                await raw.aclose()
                    except httpx.TransportError as exc:
                        await self._wait_before_retry(_connection_error(exc), attempt, deadline)
                        continue
                    response = HttpResponse(raw.status_code, raw.headers, body)
                    if observe is not None:
                        observe(raw.status_code, raw.headers)
                    if raw.status_code < 400:
                        return Sent(response, attempt)
                    await self._wait_before_retry(error_from(response), attempt, deadline)
        except TimeoutError:
            raise errors.DeadlineExceededError("the request's deadline expired") from None

    async def stream(
        self,
        request: HttpRequest,
        *,
        error_from: ErrorFactory,
        deadline: float | None = None,
        observe: Observer | None = None,
        attempts: list[int] | None = None,
    ) -> AsyncGenerator[RawEvent, None]:
        """Yield the raw events of a streamed request. Retries only until the first event is delivered.

        A connection that breaks after delivery raises `TruncatedStreamError`; the caller keeps what it has.
        """
        delivered = False
        attempt = 0
        try:
            async with asyncio.timeout_at(_loop_deadline(deadline)):
                while True:
                    attempt += 1
                    if attempts is not None:
                        attempts[:] = [attempt]
                    try:
                        built = self._build(request)
                        with telemetry.http_attempt(built, attempt) as observed:
                            raw = await self._transport.handle_async_request(built)
                            observed.answered(raw.status_code, raw.headers)
                        try:
                            if observe is not None:
                                observe(raw.status_code, raw.headers)
                            if raw.status_code >= 400:
                                body = await raw.aread()
                                error = error_from(HttpResponse(raw.status_code, raw.headers, body))
                            else:
                                async for event in _decode(raw, request.stream_format):
                                    delivered = True
                                    yield event
                                return
                        finally:
                            await raw.aclose()  # also when the consumer stops early: the upstream sees it go
                    except httpx.TransportError as exc:
                        if delivered:
                            raise errors.TruncatedStreamError(
                                f"the stream broke after output was delivered: {exc!r}"
                            ) from exc
                        error = _connection_error(exc)
                    await self._wait_before_retry(error, attempt, deadline)
        except TimeoutError:
            raise errors.DeadlineExceededError("the request's deadline expired") from None


def _session(max_connections: int) -> aiohttp.ClientSession:
    """The aiohttp session under the httpx transport (created on first use, inside the running loop).

    Cookies are never kept: one executor serves every caller of a model, so a cookie set by a provider's answer
    to one caller must not ride along on the next caller's request.
    """
    connector = aiohttp.TCPConnector(
        limit=max_connections, keepalive_timeout=5.0, ssl=httpx.create_ssl_context(trust_env=False)
    )
    return aiohttp.ClientSession(connector=connector, cookie_jar=aiohttp.DummyCookieJar())


def _loop_deadline(deadline: float | None) -> float | None:
    """Convert a `time.monotonic()` deadline to the running loop's clock."""
    if deadline is None:
        return None
    return asyncio.get_running_loop().time() + (deadline - time.monotonic())


def _connection_error(exc: httpx.TransportError) -> errors.ModelError:
    if isinstance(exc, httpx.TimeoutException):
        return errors.ProviderUnavailableError(f"the provider timed out: {exc!r}")
    return errors.ProviderUnavailableError(f"could not reach the provider: {exc!r}")


async def _decode(raw: httpx.Response, stream_format: str | None) -> AsyncIterator[RawEvent]:
    content_type = raw.headers.get("content-type", "").partition(";")[0].strip().lower()
    if stream_format != "ndjson" and content_type and content_type != "text/event-stream":
        # An answer, not a stream: a proxy's page or a server that ignored `stream`. Retrying will not change it.
        body = (await raw.aread())[:500].decode("utf-8", "replace")
        raise errors.MalformedResponseError(
            f"the provider answered a streamed call with {content_type!r}, not an event stream: {body}",
            http_status=raw.status_code,
        )
    if stream_format == "ndjson":
        async for line in _ndjson_lines(raw):
            yield RawEvent("", line)
        return
    async for sse in httpx_sse.EventSource(raw).aiter_sse():
        yield RawEvent(sse.event if sse.event != "message" else "", sse.data.encode())


REDACTED = "[redacted]"


def _secrets(headers: Mapping[str, str]) -> tuple[str, ...]:
    found = set()
    for value in headers.values():
        scheme, _, token = value.partition(" ")
        for secret in (value, token if scheme.lower() in ("bearer", "basic", "token") else ""):
            if len(secret) >= 8:  # shorter values are not credentials, and redacting them would mangle text
                found.add(secret)
    return tuple(sorted(found, key=len, reverse=True))


def redact(exc: errors.ModelError, secrets: tuple[str, ...]) -> errors.ModelError:
    """Remove every secret from what `exc` carries into messages, statuses and records."""
    if not secrets:
        return exc
    for secret in secrets:
        if secret in exc.message:
            exc.message = exc.message.replace(secret, REDACTED)
        if secret in exc.provider_code:
            exc.provider_code = exc.provider_code.replace(secret, REDACTED)
    exc.args = (exc.message,)
    return exc


async def _ndjson_lines(raw: httpx.Response) -> AsyncIterator[bytes]:
    """The non-blank lines of an NDJSON body. A stream that delivered lines and then ends inside one (no newline,
    and what is left is the start of a JSON object that does not parse) was cut, whatever the connection said:
    `TruncatedStreamError`, as a broken SSE stream gives. A body that is one broken line is a malformed answer,
    not a cut stream: it goes to the lift, which says so."""
    buffer = bytearray()
    delivered = False
    async for chunk in raw.aiter_bytes():
        buffer += chunk
        if b"\n" not in chunk:
            continue  # a long line arriving in pieces is split once, when it ends
        *lines, rest = bytes(buffer).split(b"\n")
        buffer = bytearray(rest)
        for line in lines:
            if line.strip():
                delivered = True
                yield line.rstrip(b"\r")
    pending = bytes(buffer).strip()
    if pending:
        if delivered and pending.startswith(b"{"):
            try:
                orjson.loads(pending)
            except orjson.JSONDecodeError:
                raise errors.TruncatedStreamError(f"the stream ended inside a line ({len(pending)} bytes)") from None
        yield pending  # a whole last line without its newline, or a malformed answer (the lift says so)
