"""Limiters from the configuration file: the `limiter_backend` section and each `limits` / `limiters` entry.

```yaml
limiter_backend:                 # optional; without it every limiter is in-memory (one process's own)
  url: redis://127.0.0.1:6379/0  # or `url_env: MODELIR_REDIS_URL` to keep a password out of the file
  on_unavailable: wait           # wait | fail | local (what a call does while Redis cannot be reached)
  key_prefix: modelir            # replicas that share a quota share the URL, the prefix and the limiter name
  lease_seconds: 60              # a concurrency slot held by a replica that died is free again after this
```

The Redis key of a limiter is its place in the file (`limiters.openai-key`, `models.gpt-mini.limits`), so
replicas started from the same file share every quota, and models that share a `limiters` entry share it too.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from modelir.limiter.base import UNAVAILABLE_POLICIES, BaseLimiter, UnavailablePolicy
from modelir.limiter.memory import Limiter

LIMIT_KEYS = frozenset({"max_concurrency", "requests_per_minute", "tokens_per_minute"})
_BACKEND_KEYS = frozenset({"url", "url_env", "on_unavailable", "key_prefix", "lease_seconds"})

Fail = Callable[[str, str], Exception]


@dataclass(frozen=True, slots=True)
class LimiterBackend:
    """How to build every limiter of one configuration: in memory (`url` None) or in Redis."""

    url: str | None = None
    on_unavailable: UnavailablePolicy = "wait"
    key_prefix: str = "modelir"
    lease_seconds: float = 60.0

    def build(self, spec: Any, where: str, fail: Fail) -> BaseLimiter:
        """The limiter for one `limits` mapping found at `where` in the file."""
        if not isinstance(spec, dict):
            raise fail(where, "expected a mapping")
        unknown = set(spec) - LIMIT_KEYS
        if unknown:
            raise fail(f"{where}.{sorted(unknown)[0]}", f"unknown limit; expected one of {sorted(LIMIT_KEYS)}")
        for key, value in spec.items():
            if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
                raise fail(f"{where}.{key}", "expected a positive number")
        if "max_concurrency" in spec and not isinstance(spec["max_concurrency"], int):
            raise fail(f"{where}.max_concurrency", "expected a whole number")
        concurrency, rpm = spec.get("max_concurrency"), spec.get("requests_per_minute")
        tpm = spec.get("tokens_per_minute")
        if self.url is None:
            return Limiter(max_concurrency=concurrency, requests_per_minute=rpm, tokens_per_minute=tpm)
        # A limiter with no limits is still shared: a 429 one replica sees pauses the others.
        from modelir.limiter.redis_limiter import RedisLimiter  # the `redis` extra, only when configured

        return RedisLimiter(
            self.url,
            where,
            max_concurrency=concurrency,
            requests_per_minute=rpm,
            tokens_per_minute=tpm,
            on_unavailable=self.on_unavailable,
            key_prefix=self.key_prefix,
            lease_seconds=self.lease_seconds,
        )


def limiter_backend(spec: Any, fail: Fail, environ: Mapping[str, str]) -> LimiterBackend:
    """Read the `limiter_backend` section (absent: in-memory). `spec` may also be just the URL."""
    where = "limiter_backend"
    if spec is None or spec == "memory":
        return LimiterBackend()
    if isinstance(spec, str):
        spec = {"url": spec}
    if not isinstance(spec, dict):
        raise fail(where, "expected a redis:// URL or a mapping with `url`")
    unknown = set(spec) - _BACKEND_KEYS
    if unknown:
        raise fail(f"{where}.{sorted(unknown)[0]}", f"unknown field; expected one of {sorted(_BACKEND_KEYS)}")
    if ("url" in spec) == ("url_env" in spec):
        raise fail(where, "give exactly one of `url` and `url_env`")
    if "url_env" in spec:
        url = environ.get(str(spec["url_env"]), "")
        if not url:
            raise fail(f"{where}.url_env", f"the environment variable {spec['url_env']} is not set")
    else:
        url = spec["url"]
    if url == "memory":
        return LimiterBackend()
    if not isinstance(url, str) or not url.startswith(("redis://", "rediss://", "unix://")):
        raise fail(f"{where}.url", "expected `memory` or a redis://, rediss:// or unix:// URL")
    try:
        import redis  # noqa: F401
    except ImportError:
        raise fail(f"{where}.url", "the Redis backend needs the `redis` extra: pip install 'modelir[redis]'") from None
    policy = next((p for p in UNAVAILABLE_POLICIES if p == spec.get("on_unavailable", "wait")), None)
    if policy is None:
        given = spec.get("on_unavailable")
        raise fail(f"{where}.on_unavailable", f"expected one of {list(UNAVAILABLE_POLICIES)}, not {given!r}")
    prefix = spec.get("key_prefix", "modelir")
    if not isinstance(prefix, str) or not prefix:
        raise fail(f"{where}.key_prefix", "expected a non-empty string")
    lease = spec.get("lease_seconds", 60.0)
    if isinstance(lease, bool) or not isinstance(lease, int | float) or lease <= 0:
        raise fail(f"{where}.lease_seconds", "expected a positive number of seconds")
    return LimiterBackend(url=url, on_unavailable=policy, key_prefix=prefix, lease_seconds=float(lease))
