"""The Redis limiter backend: one quota shared by every replica, kept in Redis and updated by Lua scripts.

Every replica configured with the same `limiter_backend` URL and the same limiter name spends one budget:
requests per minute and tokens per minute are token buckets refilled continuously by Redis's own clock (`TIME`,
so replicas' clocks never disagree), concurrency is a sorted set of leases that expire if their holder dies, and
a provider's feedback (a 429's `Retry-After`, spent `x-ratelimit-*` quota headers) seen by one replica pauses
them all. Each check-and-take is one atomic script, so two replicas can never both take the last unit.

Within one replica callers pass one at a time, in arrival order, as with the in-memory limiter; only the caller
at the head of the line talks to Redis. When Redis cannot be reached the configured policy decides (`wait`,
`fail` with `LimiterUnavailableError`, or `local`: fall back to this process's own limits, with a warning, and
go back to Redis once it answers again). Every Redis operation has a socket timeout (`socket_timeout`, a second by
default), so a Redis that accepts connections and never answers (a hung or stopped process) is found down within
it; the callers queued behind that probe then act on the policy at once instead of each probing in turn. The
`redis` package is an extra (`modelir[redis]`), imported here only.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import urlsplit

import redis.asyncio as aioredis
from redis import exceptions as redis_errors

from modelir import errors
from modelir.limiter.base import UNAVAILABLE_POLICIES, BaseLimiter, UnavailablePolicy, outlasts
from modelir.limiter.memory import Limiter

logger = logging.getLogger("modelir.limiter")

_REDIS_DOWN = (redis_errors.ConnectionError, redis_errors.TimeoutError, OSError)


class LimiterUnavailableError(errors.ProviderUnavailableError):
    """The shared limiter's Redis could not be reached and the policy says to fail the call."""


# KEYS[1] the state hash, KEYS[2] the lease set. ARGV: rpm, tpm, max concurrency (0 = no limit), estimated
# tokens, lease id, lease ttl (ms), poll interval (ms). Returns {1, 0} when admitted, {0, ms to wait} otherwise.
_ACQUIRE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000
local rpm, tpm, maxc = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local estimate, ttl, poll = tonumber(ARGV[4]), tonumber(ARGV[6]), tonumber(ARGV[7])
local s = redis.call('HMGET', KEYS[1], 'paused_until', 'req_level', 'req_stamp', 'tok_level', 'tok_stamp')
local wait = 0
local paused = tonumber(s[1] or '0')
if paused > now then wait = paused - now end
local function refill(level, stamp, per_minute)
  if not level then return per_minute end
  return math.min(per_minute, tonumber(level) + (now - tonumber(stamp)) * per_minute / 60000)
end
local req, tok
if rpm > 0 then
  req = refill(s[2], s[3], rpm)
  if req < 1 then wait = math.max(wait, (1 - req) * 60000 / rpm) end
end
if tpm > 0 and estimate > 0 then
  tok = refill(s[4], s[5], tpm)
  local need = math.min(estimate, tpm)
  if tok < need then wait = math.max(wait, (need - tok) * 60000 / tpm) end
end
if maxc > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
  if redis.call('ZCARD', KEYS[2]) >= maxc then wait = math.max(wait, poll) end
end
if wait > 0 then return {0, math.ceil(wait)} end
if rpm > 0 then redis.call('HSET', KEYS[1], 'req_level', req - 1, 'req_stamp', now) end
if tok then redis.call('HSET', KEYS[1], 'tok_level', tok - estimate, 'tok_stamp', now) end
if maxc > 0 then
  redis.call('ZADD', KEYS[2], now + ttl, ARGV[5])
  redis.call('PEXPIRE', KEYS[2], ttl * 2)
end
redis.call('PEXPIRE', KEYS[1], math.max(120000, paused - now + 60000))
return {1, 0}
"""

# KEYS[1] the state hash. ARGV: tpm, tokens to give back (negative: to take). A full bucket stays full.
_SETTLE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000
local tpm, delta = tonumber(ARGV[1]), tonumber(ARGV[2])
local s = redis.call('HMGET', KEYS[1], 'tok_level', 'tok_stamp')
local level = tpm
if s[1] then level = math.min(tpm, tonumber(s[1]) + (now - tonumber(s[2])) * tpm / 60000) end
redis.call('HSET', KEYS[1], 'tok_level', math.min(tpm, level + delta), 'tok_stamp', now)
if redis.call('PTTL', KEYS[1]) < 120000 then redis.call('PEXPIRE', KEYS[1], 120000) end
return 1
"""

# KEYS[1] the state hash. ARGV: pause (ms). Pauses only ever lengthen.
_PAUSE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000
local until_ms = now + tonumber(ARGV[1])
local current = tonumber(redis.call('HGET', KEYS[1], 'paused_until') or '0')
if until_ms > current then
  redis.call('HSET', KEYS[1], 'paused_until', until_ms)
  redis.call('PEXPIRE', KEYS[1], math.max(120000, tonumber(ARGV[1]) + 60000))
end
return 1
"""

# KEYS[1] the lease set. ARGV: lease id, ttl (ms). Extends a lease that still exists.
_RENEW = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000
return redis.call('ZADD', KEYS[1], 'XX', 'CH', now + tonumber(ARGV[2]), ARGV[1])
"""


class RedisLimiter(BaseLimiter):
    """Limits kept in Redis under `name`, shared by every process that uses the same URL, prefix and name."""

    def __init__(
        self,
        url: str,
        name: str,
        *,
        max_concurrency: int | None = None,
        requests_per_minute: float | None = None,
        tokens_per_minute: float | None = None,
        on_unavailable: UnavailablePolicy = "wait",
        key_prefix: str = "modelir",
        lease_seconds: float = 60.0,
        poll_seconds: float = 0.02,
        socket_timeout: float = 1.0,
        local_probe_seconds: float = 5.0,
    ) -> None:
        if on_unavailable not in UNAVAILABLE_POLICIES:
            raise ValueError(f"on_unavailable must be one of {UNAVAILABLE_POLICIES}, not {on_unavailable!r}")
        self.url = url
        self.name = name
        self.max_concurrency = max_concurrency
        self.requests_per_minute = requests_per_minute
        self.tokens_per_minute = tokens_per_minute
        self.on_unavailable: UnavailablePolicy = on_unavailable
        # One hash tag, so that a Redis Cluster keeps both keys of a limiter on one shard (scripts need that).
        tag = f"{{{key_prefix}:{name}}}"
        self._keys = (f"{tag}:state", f"{tag}:leases")
        self._lease_ms = int(lease_seconds * 1000)
        self._poll_ms = max(1, int(poll_seconds * 1000))
        self._socket_timeout = socket_timeout
        self._local_probe_seconds = local_probe_seconds
        # A grpc/redis asyncio connection belongs to one event loop: one client per loop.
        self._clients: dict[asyncio.AbstractEventLoop, tuple[aioredis.Redis, dict[str, Any]]] = {}
        self._gate: dict[asyncio.AbstractEventLoop, asyncio.Lock] = {}
        self._local = Limiter(
            max_concurrency=max_concurrency,
            requests_per_minute=requests_per_minute,
            tokens_per_minute=tokens_per_minute,
        )
        self._local_paused_until = 0.0  # this replica's own view, applied at once even before Redis hears it
        self._pending: set[asyncio.Task[None]] = set()  # feedback on its way to Redis
        self._releases: set[asyncio.Task[None]] = set()  # concurrency slots on their way back
        self._down_since: float | None = None  # monotonic time Redis was last found unreachable
        self.in_flight = 0

    def __repr__(self) -> str:
        return f"RedisLimiter({self.where!r}, {self.name!r}, on_unavailable={self.on_unavailable!r})"

    @property
    def where(self) -> str:
        """The Redis address without credentials, for messages and logs."""
        parts = urlsplit(self.url)
        return f"{parts.scheme}://{parts.hostname or ''}{f':{parts.port}' if parts.port else ''}{parts.path}"

    # ---- Redis plumbing ------------------------------------------------------------------------------

    def _client(self) -> tuple[aioredis.Redis, dict[str, Any]]:
        loop = asyncio.get_running_loop()
        entry = self._clients.get(loop)
        if entry is None:
            client = aioredis.Redis.from_url(
                self.url, socket_timeout=self._socket_timeout, socket_connect_timeout=self._socket_timeout
            )
            scripts = {
                name: client.register_script(text)
                for name, text in (("acquire", _ACQUIRE), ("settle", _SETTLE), ("pause", _PAUSE), ("renew", _RENEW))
            }
            entry = self._clients[loop] = (client, scripts)
        return entry

    async def _script(self, name: str, keys: list[str], args: list[Any]) -> Any:
        _, scripts = self._client()
        return await scripts[name](keys=keys, args=args)

    async def aclose(self) -> None:
        if self._pending or self._releases:
            await asyncio.gather(*self._pending, *self._releases, return_exceptions=True)
        loop = asyncio.get_running_loop()
        entry = self._clients.pop(loop, None)
        if entry is not None:
            await entry[0].aclose()

    def _went_down(self, exc: BaseException) -> None:
        if self._down_since is None:
            logger.warning(
                "the shared limiter %s at %s is unreachable (%s); policy: %s",
                self.name,
                self.where,
                exc,
                {"wait": "waiting for it", "fail": "failing calls", "local": "using this replica's own limits"}[
                    self.on_unavailable
                ],
            )
        self._down_since = time.monotonic()

    def _came_back(self) -> None:
        if self._down_since is not None:
            logger.warning("the shared limiter %s at %s answers again", self.name, self.where)
            self._down_since = None

    # ---- the interface -------------------------------------------------------------------------------

    @asynccontextmanager
    async def acquire(self, estimated_tokens: int = 0, *, deadline: float | None = None) -> AsyncIterator[None]:
        if self._pending:  # feedback this replica saw goes out before it admits anything else
            await asyncio.gather(*self._pending, return_exceptions=True)
        lease = await self._admit(estimated_tokens, deadline)
        if lease is None:  # the `local` policy while Redis is down
            async with self._local.acquire(estimated_tokens, deadline=deadline):
                yield
            return
        renew = asyncio.create_task(self._keep_lease(lease)) if self.max_concurrency else None
        self.in_flight += 1
        try:
            yield
        finally:
            self.in_flight -= 1
            if renew is not None:
                renew.cancel()
                # The caller does not wait for the slot to be handed back: that round trip is off the call's path.
                task = asyncio.get_running_loop().create_task(self._release(lease))
                self._releases.add(task)
                task.add_done_callback(self._releases.discard)

    async def _admit(self, estimated_tokens: int, deadline: float | None = None) -> str | None:
        """Wait at the head of this replica's line until Redis admits the call; the lease id, or None to go
        local."""
        loop = asyncio.get_running_loop()
        gate = self._gate.setdefault(loop, asyncio.Lock())
        lease = uuid.uuid4().hex
        backoff = 0.05
        async with gate:
            while True:
                local_wait = self._local_paused_until - time.monotonic()
                if local_wait > 0:
                    outlasts(local_wait, deadline, repr(self.name))
                    await asyncio.sleep(local_wait)
                if self._down_since is not None:  # found down just now: act without another probe
                    down_for = time.monotonic() - self._down_since
                    if self.on_unavailable == "local" and down_for < self._local_probe_seconds:
                        return None
                    if self.on_unavailable == "fail" and down_for < self._socket_timeout:
                        raise LimiterUnavailableError(
                            f"the shared limiter {self.name!r} at {self.where} is unreachable"
                        )
                try:
                    admitted, wait_ms = await self._script(
                        "acquire",
                        list(self._keys),
                        [
                            self.requests_per_minute or 0,
                            self.tokens_per_minute or 0,
                            self.max_concurrency or 0,
                            estimated_tokens,
                            lease,
                            self._lease_ms,
                            self._poll_ms,
                        ],
                    )
                except _REDIS_DOWN as exc:
                    self._went_down(exc)
                    if self.on_unavailable == "fail":
                        raise LimiterUnavailableError(
                            f"the shared limiter {self.name!r} at {self.where} is unreachable: {exc}"
                        ) from None
                    if self.on_unavailable == "local":
                        return None
                    await asyncio.sleep(backoff)
                    backoff = min(2.0, backoff * 2)
                    continue
                self._came_back()
                if admitted:
                    return lease
                outlasts(int(wait_ms) / 1000, deadline, repr(self.name))
                await asyncio.sleep(int(wait_ms) / 1000)

    async def _keep_lease(self, lease: str) -> None:
        while True:
            await asyncio.sleep(self._lease_ms / 3000)
            try:
                await self._script("renew", [self._keys[1]], [lease, self._lease_ms])
            except _REDIS_DOWN as exc:  # the lease will expire by itself: the slot is not lost for good
                self._went_down(exc)

    async def _release(self, lease: str) -> None:
        try:
            client, _ = self._client()
            await client.zrem(self._keys[1], lease)
        except _REDIS_DOWN as exc:
            self._went_down(exc)
            logger.warning("could not release a concurrency lease of %s; it expires by itself", self.name)

    def _send(self, name: str, keys: list[str], args: list[Any]) -> None:
        """Run a feedback script without making the caller wait (it runs before this replica's next admission)."""

        async def send() -> None:
            try:
                await self._script(name, keys, args)
            except _REDIS_DOWN as exc:
                self._went_down(exc)
                logger.warning("the shared limiter %s did not receive %s feedback: %s", self.name, name, exc)

        task = asyncio.get_running_loop().create_task(send())
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    def settle_tokens(self, estimated: int, actual: int) -> None:
        self._local.settle_tokens(estimated, actual)
        if self.tokens_per_minute and actual != estimated:
            self._send("settle", [self._keys[0]], [self.tokens_per_minute, estimated - actual])

    def pause_for(self, seconds: float) -> None:
        if seconds <= 0:
            return
        self._local_paused_until = max(self._local_paused_until, time.monotonic() + seconds)
        self._local.pause_for(seconds)
        self._send("pause", [self._keys[0]], [int(seconds * 1000)])
