"""Connecting to a provider in one line: `connect("openai_chat", "gpt-4o-mini")` is a ready `Model`.

A `Connection` is a `Model` that owns its HTTP sessions. It is an async and a sync context manager and has
`aclose()` / `close()`; a program that forgets to close it still ends without an "Unclosed client session":

- An HTTP session belongs to the event loop it was opened on, so a connection keeps one executor per loop: the
  caller's loop for the async methods, the SDK's private loop for the sync twins.
- An executor opened on a loop that `asyncio.run` manages is closed when that loop shuts down (it registers a
  one-step async generator, which `asyncio.run` finalises before closing the loop); the private loop's executor
  is closed at interpreter exit.
"""

from __future__ import annotations

import asyncio
import atexit
import os
import weakref
from collections.abc import AsyncIterator, Mapping
from types import TracebackType
from typing import Any

from modelir import sync
from modelir.http.executor import Executor
from modelir.http.retry import RetryPolicy
from modelir.limiter import Limiter
from modelir.model import Model
from modelir.registry import TransportOptionError, build_transport, registry
from modelir.sync import background_loop as _background_loop
from modelir.sync import run_sync as _sync
from modelir.transports import HttpTransport
from modelir.writing import ArgumentError

# Hosted providers: the default base URL, the environment variable their own SDK reads a base URL from, and the
# ones it reads the key from (so a program moved from the provider's SDK keeps its environment).
_HOSTED: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "openai_chat": ("https://api.openai.com/v1", "OPENAI_BASE_URL", ("OPENAI_API_KEY",)),
    "openai_completions": ("https://api.openai.com/v1", "OPENAI_BASE_URL", ("OPENAI_API_KEY",)),
    "openai_responses": ("https://api.openai.com/v1", "OPENAI_BASE_URL", ("OPENAI_API_KEY",)),
    "anthropic_messages": ("https://api.anthropic.com", "ANTHROPIC_BASE_URL", ("ANTHROPIC_API_KEY",)),
    "google_genai": ("https://generativelanguage.googleapis.com", "", ("GEMINI_API_KEY", "GOOGLE_API_KEY")),
}
# Self-hosted engines: a default only where the engine has a conventional local port; never a key by default.
_LOCAL_DEFAULT_URL = {"ollama": "http://127.0.0.1:11434"}


class Connection(Model):
    """A `Model` with its own HTTP sessions (one per event loop), closed by `close()`, `aclose()` or `with`."""

    _first: Executor | None = None

    def __init__(
        self,
        transport: Any,
        *,
        base_url: str = "",
        headers: Mapping[str, str] | None = None,
        retry: RetryPolicy | None = None,
        **options: Any,
    ) -> None:
        self._endpoint = (base_url, dict(headers or {}), retry or RetryPolicy())
        self._executors: dict[asyncio.AbstractEventLoop, Executor] = {}
        self._closers: dict[asyncio.AbstractEventLoop, list[AsyncIterator[None]]] = {}
        self._http = isinstance(transport, HttpTransport)
        super().__init__(transport, executor=self._new_executor() if self._http else None, **options)
        if self._http:
            atexit.register(_close_at_exit, weakref.ref(self))

    def _new_executor(self) -> Executor:
        base_url, headers, retry = self._endpoint
        return Executor(base_url, headers=headers, retry=retry)

    @property
    def executor(self) -> Executor | None:
        """The executor of the running loop (the private loop's when none runs), opened on first use."""
        if not self._http:
            return None
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            loop = _background_loop()
        executor = self._executors.get(loop)
        if executor is None:
            for stale in [other for other in {*self._executors, *self._closers} if other.is_closed()]:
                self._executors.pop(stale, None)
                self._closers.pop(stale, None)
            executor = self._executors[loop] = self._first or self._new_executor()
            self._first = None
            if loop is not _private_loop() and loop.is_running():
                # Held until the loop closes: a collected generator would be finalised (closing its executor) at once.
                closer = _close_on_shutdown(executor)
                self._closers.setdefault(loop, []).append(closer)
                loop.create_task(_start(closer))
        return executor

    @executor.setter
    def executor(self, value: Executor | None) -> None:
        self._first = value  # the one `Model.__init__` is given: used by the first loop that asks

    async def aclose(self) -> None:
        """Close the sessions opened on the running loop."""
        executor = self._executors.pop(asyncio.get_running_loop(), None)
        if executor is not None:
            await executor.aclose()

    def close(self) -> None:
        """Close the sessions the sync methods opened (async code uses `aclose`)."""
        loop = _private_loop()
        if loop is not None and loop in self._executors:
            _sync(self._close_background())

    async def _close_background(self) -> None:
        executor = self._executors.pop(asyncio.get_running_loop(), None)
        if executor is not None:
            await executor.aclose()

    async def __aenter__(self) -> Connection:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    def __repr__(self) -> str:
        base_url = self._endpoint[0]
        return f"Connection({self.transport.name!r}, {self.transport.provider_model!r}, name={self.name!r}" + (
            f", base_url={base_url!r})" if base_url else ")"
        )


def _private_loop() -> asyncio.AbstractEventLoop | None:
    """The loop the sync twins run on, if it has started (never starts it: `close()` at exit must not)."""
    return sync._loop


async def _start(generator: AsyncIterator[None]) -> None:
    await generator.__anext__()


async def _close_on_shutdown(executor: Executor) -> AsyncIterator[None]:
    """Suspended until the loop finalises its async generators (asyncio.run does, before closing the loop).

    Closing an executor twice is harmless, so one closed by `aclose()` before that needs no bookkeeping here.
    """
    try:
        yield
    finally:
        await executor.aclose()


def _close_at_exit(ref: weakref.ref[Connection]) -> None:
    connection = ref()
    if connection is not None:
        connection.close()


def connect(
    transport: str,
    model: str = "",
    *,
    base_url: str | None = None,
    api_key: str | None = None,
    api_key_env: str | None = None,
    name: str | None = None,
    max_concurrency: int | None = None,
    requests_per_minute: float | None = None,
    tokens_per_minute: float | None = None,
    limiter: Limiter | None = None,
    timeout: float | None = None,
    max_attempts: int = 4,
    options: Mapping[str, Any] | None = None,
) -> Connection:
    """A model behind a native provider protocol, ready to use.

    `transport` is a transport name (`openai_chat`, `anthropic_messages`, `google_genai`, `vllm`, `reference`,
    ...), `model` the provider's model id. Hosted providers read the base URL and the key from the environment
    variables their own SDK reads (`OPENAI_BASE_URL`, `OPENAI_API_KEY`, ...) unless `base_url`, `api_key` or
    `api_key_env` is given, and default the base URL to the provider's API.
    `name` is the name requests use (the provider model id by default). The limits build a limiter of its own;
    pass `limiter` to share one between connections (one per API key, say).
    `options` are the transport's own options, as a model's entry in the configuration file gives them (sglang's
    `chat_template` or `tokenizer_config`, Ollama's `vision`, ...): an option the transport does not take, or a
    value it refuses, raises `ArgumentError` naming it; a relative path is read from the working directory.
    """
    if transport not in registry():
        raise ArgumentError("transport", f"one of {', '.join(registry())}", transport)
    if not isinstance(model, str):
        raise ArgumentError("model", "the provider's model id as a string", model)
    transport_options = dict(options or {})
    if "provider_model" in transport_options:
        raise ArgumentError("options.provider_model", "nothing: the provider's model id is connect's `model`")
    if model:
        transport_options["provider_model"] = model
    try:
        built = build_transport(transport, transport_options)
    except TransportOptionError as exc:
        raise ArgumentError(
            f"options.{exc.key}", f"an option transport {transport!r} takes, with a value it accepts", hint=exc.problem
        ) from None
    if limiter is not None and any(v is not None for v in (max_concurrency, requests_per_minute, tokens_per_minute)):
        raise ArgumentError("limiter", "either a shared limiter or limits of this connection's own, not both")
    for field, value in (("max_concurrency", max_concurrency), ("requests_per_minute", requests_per_minute)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int | float) or value <= 0):
            raise ArgumentError(field, "a positive number", value)
    limiter = limiter or Limiter(
        max_concurrency=max_concurrency, requests_per_minute=requests_per_minute, tokens_per_minute=tokens_per_minute
    )
    if timeout is not None and (not isinstance(timeout, int | float) or timeout <= 0):
        raise ArgumentError("timeout", "a positive number of seconds", timeout)
    settings: dict[str, Any] = {"name": name or model or transport, "limiter": limiter, "default_timeout": timeout}
    if not isinstance(built, HttpTransport):
        if base_url or api_key or api_key_env:
            raise ArgumentError("base_url", f"nothing: transport {transport!r} runs in-process, without HTTP")
        return Connection(built, **settings)

    default_url, url_env, key_envs = _HOSTED.get(transport, (_LOCAL_DEFAULT_URL.get(transport, ""), "", ()))
    base_url = base_url or (os.environ.get(url_env) if url_env else None) or default_url
    if not base_url or not base_url.startswith(("http://", "https://")):
        raise ArgumentError("base_url", f"the http(s) URL of the {transport} server", base_url)
    if api_key is None:
        envs = (api_key_env,) if api_key_env else key_envs
        api_key = next((os.environ[e] for e in envs if os.environ.get(e)), "")
        if not api_key and (api_key_env or key_envs):
            names = " or ".join(envs)
            raise ArgumentError("api_key", f"a key: the environment variable {names} is not set (or pass api_key=)")
    if not isinstance(max_attempts, int) or max_attempts < 1:
        raise ArgumentError("max_attempts", "a whole number of at least 1", max_attempts)
    return Connection(
        built,
        base_url=base_url,
        headers=built.auth_headers(api_key),
        retry=RetryPolicy(max_attempts=max_attempts),
        **settings,
    )
