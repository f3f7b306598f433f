"""The aiohttp session an executor sends through: no cookies kept, a bound on connecting, one TLS context a process."""

from __future__ import annotations

import functools
import ssl

import aiohttp
import httpx


def aiohttp_session(max_connections: int, connect_timeout: float = 10.0) -> aiohttp.ClientSession:
    """An executor's aiohttp session (create it inside the running loop).

    Cookies are never kept: one executor serves every caller of a model, so a cookie set by a provider's answer
    to one caller must not ride along on the next caller's request. Per-request deadlines are enforced around
    each call (aiohttp's default five-minute total is not one of them); only connecting gets its own bound.
    """
    connector = aiohttp.TCPConnector(limit=max_connections, keepalive_timeout=5.0, ssl=_ssl_context())
    return aiohttp.ClientSession(
        connector=connector,
        cookie_jar=aiohttp.DummyCookieJar(),
        timeout=aiohttp.ClientTimeout(total=None, sock_connect=connect_timeout),
    )


@functools.cache
def _ssl_context() -> ssl.SSLContext:
    """The TLS settings every executor's session uses (certifi's roots, as httpx has them), made once per process:
    building a context loads the whole CA bundle (~25 ms), and a context is safe to share between sessions."""
    return httpx.create_ssl_context(trust_env=False)
