"""All HTTP I/O: one place for connection reuse, deadlines, retries, stream decoding and cancellation.

Unary calls drive aiohttp directly: no `httpx.Request` / `httpx.Response` per call, which in the gateway and
in-process profiles was the largest single cost left between modelir and a hand-written aiohttp client
(bench/README.md has the side-by-side figures). Streams too: the response's content is read as it arrives
(`_AiohttpStream`) and `http.decoding` decodes the bytes. A caller who brings an httpx transport (a test's
`httpx.MockTransport`) or an `httpx.AsyncClient` gets every call through httpx instead, with the same errors.

Retries cover 429, 5xx and connection errors, wait with exponential backoff and full jitter, and honour
`Retry-After` and provider retry hints carried by the transport's typed error. A retry that would pass the
caller's deadline is not attempted. A stream is never retried once it has delivered an event. Cancelling the
caller closes the upstream connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import time
from collections.abc import AsyncGenerator, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp
import httpx
import yarl

from modelir import errors, telemetry
from modelir.http.decoding import StreamBody, decode_batches
from modelir.http.redaction import redact, secrets_in
from modelir.http.retry import RetryPolicy, timeout_for
from modelir.http.sessions import aiohttp_session
from modelir.transports.base import HttpRequest, HttpResponse, RawEvent
from modelir.version import SDK_VERSION

DEFAULT_HEADERS = {"user-agent": f"modelir/{SDK_VERSION}", "accept-encoding": "gzip, deflate"}

ErrorFactory = Callable[[HttpResponse], errors.ModelError]
Observer = Callable[[int, Mapping[str, str]], None]

# What a broken connection raises, on either path.
_CONNECTION_ERRORS = (httpx.TransportError, aiohttp.ClientError)
_TIMEOUTS = (httpx.TimeoutException, aiohttp.ServerTimeoutError)


@dataclass(slots=True)
class Sent:
    response: HttpResponse
    attempts: int


class _Outgoing:
    """One attempt's request as the wire sends it. `url` (an `httpx.URL`), `method` and `headers` are what
    `telemetry.http_attempt` reads, and it may replace `headers` with a copy carrying `traceparent`."""

    __slots__ = ("body", "headers", "method", "target", "url")

    def __init__(self, method: str, url: httpx.URL, target: Any, headers: Any, body: bytes) -> None:
        self.method, self.url, self.target, self.headers, self.body = method, url, target, headers, body


class _HttpxWire:
    """Every call through httpx: a mounted transport (`httpx.MockTransport`, `AiohttpTransport`, ...), or a
    caller's `httpx.AsyncClient` (its `send`, so the client's own settings apply)."""

    def __init__(
        self, connect_timeout: float, transport: httpx.AsyncBaseTransport | None, client: httpx.AsyncClient | None
    ) -> None:
        self._transport, self._client = transport, client
        # Per-request deadlines are enforced around each call; only connecting gets its own bound.
        self._extensions = {"timeout": httpx.Timeout(None, connect=connect_timeout).as_dict()}

    def target(self, url: httpx.URL) -> Any:
        return url

    def headers(self, merged: dict[str, str]) -> Any:
        return httpx.Headers(merged)

    async def open(self, outgoing: _Outgoing) -> StreamBody:
        """The answer's status and headers, its body not yet read (`aread` / `aiter_bytes`, then `aclose`)."""
        request = httpx.Request(
            outgoing.method, outgoing.url, content=outgoing.body, headers=outgoing.headers, extensions=self._extensions
        )
        if self._client is not None:
            return await self._client.send(request, stream=True)
        assert self._transport is not None
        return await self._transport.handle_async_request(request)

    async def exchange(self, outgoing: _Outgoing, observed: Any) -> tuple[int, Mapping[str, str], bytes]:
        raw = await self.open(outgoing)
        try:
            observed.answered(raw.status_code, raw.headers)
            body = await raw.aread()
        finally:
            await raw.aclose()
        return raw.status_code, raw.headers, body

    async def aclose(self) -> None:
        if self._transport is not None:
            await self._transport.aclose()  # a caller's client stays the caller's to close


class _AiohttpWire(_HttpxWire):
    """Unary calls and streams straight on an aiohttp session."""

    def __init__(self, connect_timeout: float, max_connections: int) -> None:
        self._session: aiohttp.ClientSession | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self._max_connections, self._connect_timeout = max_connections, connect_timeout

    def session(self) -> aiohttp.ClientSession:
        """The session, created on first use (inside the running loop, as aiohttp wants)."""
        if self._session is None:
            self._session = aiohttp_session(self._max_connections, self._connect_timeout)
            self.loop = asyncio.get_running_loop()  # the session's, for good: aiohttp binds it to this loop
        return self._session

    def target(self, url: httpx.URL) -> Any:
        return yarl.URL(str(url), encoded=True)

    def headers(self, merged: dict[str, str]) -> Any:
        return merged

    async def exchange(self, outgoing: _Outgoing, observed: Any) -> tuple[int, Mapping[str, str], bytes]:
        raw = await self.session().request(
            outgoing.method,
            outgoing.target,
            data=outgoing.body or None,
            headers=outgoing.headers,
            allow_redirects=False,
        )
        try:
            observed.answered(raw.status, raw.headers)
            body = await raw.read()
        except BaseException:
            raw.close()  # cancelled or broken mid-body: the connection goes, the upstream sees it
            raise
        raw.release()
        return raw.status, raw.headers, body

    async def open(self, outgoing: _Outgoing) -> StreamBody:
        """A stream's answer straight on the session: no httpx request, response or per-read objects."""
        raw = await self.session().request(
            outgoing.method,
            outgoing.target,
            data=outgoing.body or None,
            headers=outgoing.headers,
            allow_redirects=False,
        )
        return _AiohttpStream(raw)

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()


class _AiohttpStream:
    """An aiohttp response read as `http.decoding` reads an httpx one (`status_code`, `headers`, `aread`,
    `aiter_bytes`, `aclose`). Each read hands over what has arrived (`readany`: a token is decoded the moment its
    bytes land, not when a fixed-size chunk fills). `aclose` returns the connection to the pool only after a body
    read to its end; a stream the consumer left early, cancelled or broken closes it, so the upstream sees it go."""

    __slots__ = ("_done", "_raw", "headers", "status_code")

    def __init__(self, raw: aiohttp.ClientResponse) -> None:
        self._raw, self._done = raw, False
        self.status_code, self.headers = raw.status, raw.headers

    async def aread(self) -> bytes:
        body = await self._raw.read()
        self._done = True
        return body

    async def aiter_bytes(self) -> AsyncGenerator[bytes, None]:
        readany = self._raw.content.readany
        while chunk := await readany():
            yield chunk
        self._done = True

    async def aclose(self) -> None:
        if self._done:
            self._raw.release()
        else:
            self._raw.close()


class Executor:
    """Sends native HTTP requests for one endpoint. Share one executor between models on the same endpoint.

    `transport` (an httpx transport) or `client` (an `httpx.AsyncClient`, which stays the caller's to close)
    sends every call through httpx; without either, unary calls go straight to aiohttp."""

    def __init__(
        self,
        base_url: str,
        *,
        headers: Mapping[str, str] | None = None,
        retry: RetryPolicy | None = None,
        connect_timeout: float = 10.0,
        max_connections: int = 256,
        transport: httpx.AsyncBaseTransport | None = None,
        client: httpx.AsyncClient | None = None,
    ) -> None:
        if transport is not None and client is not None:
            raise ValueError("give an httpx transport or an httpx client, not both")
        self.retry = retry or RetryPolicy()
        self._base_url = base_url.rstrip("/") + "/"
        # Lower-case names, so a configured header replaces a default of the same name whatever its spelling.
        self._base_headers = {k.lower(): v for k, v in {**DEFAULT_HEADERS, **(headers or {})}.items()}
        # The credentials this executor sends (the configured headers' values, and a bearer token alone): no error
        # it raises carries them, whatever the provider reflects back in its error body.
        self._secrets = secrets_in(headers or {})
        self.secrets = self._secrets  # for what the model writes from an answer (shape errors, kept raw bodies)
        self._wire: _HttpxWire = (
            _AiohttpWire(connect_timeout, max_connections)
            if transport is None and client is None
            else _HttpxWire(connect_timeout, transport, client)
        )
        # The URLs and merged headers are cached per path and header set: no URL parsing or merging per call.
        self._urls: dict[str, tuple[httpx.URL, Any]] = {}
        self._header_sets: dict[tuple[tuple[str, str], ...], Any] = {}

    async def aclose(self) -> None:
        await self._wire.aclose()

    @property
    def loop(self) -> asyncio.AbstractEventLoop | None:
        """The event loop this executor's aiohttp session lives on (every call of it runs there), once it has made
        one; None before, and on the httpx wire. Callers that need the running loop per call read it here instead
        of asking asyncio (`timeout_for`)."""
        return getattr(self._wire, "loop", None)

    def _build(self, request: HttpRequest) -> _Outgoing:
        urls = self._urls.get(request.path)
        if urls is None:
            url = httpx.URL(self._base_url + request.path.lstrip("/"))
            urls = self._urls[request.path] = (url, self._wire.target(url))
        headers = self._header_sets.get(request.headers)
        if headers is None:
            merged = {**self._base_headers, **{k.lower(): v for k, v in request.headers}}
            headers = self._header_sets[request.headers] = self._wire.headers(merged)
        return _Outgoing(request.method, urls[0], urls[1], headers, request.body)

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
        deadline_enforced: bool = False,
    ) -> Sent:
        """Send a unary request, retrying as the policy allows. `deadline` is a `time.monotonic()` value.

        `deadline_enforced`: the caller already runs this call under a timeout for `deadline` (as `Model` does,
        around the limiter and the lift too), so the executor only uses it to decide on retries."""
        try:
            async with timeout_for(None if deadline_enforced else deadline):
                attempt = 0
                while True:
                    attempt += 1
                    try:
                        outgoing = self._build(request)
                        with telemetry.http_attempt(outgoing, attempt) as observed:
                            status, headers, body = await self._wire.exchange(outgoing, observed)
                    except _CONNECTION_ERRORS as exc:
                        await self._wait_before_retry(_connection_error(exc), attempt, deadline)
                        continue
                    response = HttpResponse(status, headers, body)
                    if observe is not None:
                        observe(status, headers)
                    if status < 400:
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
        deadline_enforced: bool = False,
    ) -> AsyncGenerator[RawEvent, None]:
        """Yield the raw events of a streamed request. Retries only until the first event is delivered.

        A connection that breaks after delivery raises `TruncatedStreamError`; the caller keeps what it has.
        `deadline_enforced` as for `send`.
        """
        batches = self.stream_batches(
            request,
            error_from=error_from,
            deadline=deadline,
            observe=observe,
            attempts=attempts,
            deadline_enforced=deadline_enforced,
        )
        async with contextlib.aclosing(batches):
            async for batch in batches:
                for event in batch:
                    yield event

    async def stream_batches(
        self,
        request: HttpRequest,
        *,
        error_from: ErrorFactory,
        deadline: float | None = None,
        observe: Observer | None = None,
        attempts: list[int] | None = None,
        deadline_enforced: bool = False,
    ) -> AsyncGenerator[list[RawEvent], None]:
        """`stream`, the events that each read of the answer completes together (a list, never empty): a
        consumer that lifts a read's events at once pays the generator steps per read, not per event."""
        delivered = False
        attempt = 0
        try:
            async with timeout_for(None if deadline_enforced else deadline):
                while True:
                    attempt += 1
                    if attempts is not None:
                        attempts[:] = [attempt]
                    try:
                        outgoing = self._build(request)
                        with telemetry.http_attempt(outgoing, attempt) as observed:
                            raw = await self._wire.open(outgoing)
                            observed.answered(raw.status_code, raw.headers)
                        try:
                            if observe is not None:
                                observe(raw.status_code, raw.headers)
                            if raw.status_code >= 400:
                                body = await raw.aread()
                                error = error_from(HttpResponse(raw.status_code, raw.headers, body))
                            else:
                                async for batch in decode_batches(raw, request.stream_format):
                                    delivered = True
                                    yield batch
                                return
                        finally:
                            await raw.aclose()  # also when the consumer stops early: the upstream sees it go
                    except _CONNECTION_ERRORS as exc:
                        if delivered:
                            raise errors.TruncatedStreamError(
                                f"the stream broke after output was delivered: {exc!r}"
                            ) from exc
                        error = _connection_error(exc)
                    await self._wait_before_retry(error, attempt, deadline)
        except TimeoutError:
            raise errors.DeadlineExceededError("the request's deadline expired") from None


def _connection_error(exc: Exception) -> errors.ModelError:
    if isinstance(exc, _TIMEOUTS):
        return errors.ProviderUnavailableError(f"the provider timed out: {_in_words(exc)}")
    return errors.ProviderUnavailableError(f"could not reach the provider: {_in_words(exc)}")


def _in_words(exc: Exception) -> str:
    """What went wrong with a connection, as a user reads it: an aiohttp repr names internal classes and keys."""
    if isinstance(exc, aiohttp.ClientConnectorError):
        cause = exc.os_error
        reason = os.strerror(cause.errno) if isinstance(cause.errno, int) and cause.errno > 0 else None
        return f"cannot connect to {exc.host}:{exc.port}: {reason or cause.strerror or cause}"
    if isinstance(exc, aiohttp.ServerDisconnectedError):
        return "the server closed the connection without answering"
    return str(exc) or type(exc).__name__
